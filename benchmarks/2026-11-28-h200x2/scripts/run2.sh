R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
OLD=$PWD/benchmarks/2026-11-28-h200x2/scripts/old  # git archive b3dadcd fluxlite | tar -x -C there (not kept here)
SH=12001x1000x7880,8192x4096x8192,16384x2048x4096,3000x9000x6144,8192x14336x8192,7368x6912x10336
for rep in 1 2; do
for code in old new new3; do
  PP=$PWD; [ $code = old ] && PP=$OLD:$PWD; G=; [ $code = new3 ] && G=3
  PYTHONPATH=$PP:/tmp/site GPPS=$G TAG=$code SH=$SH timeout 60 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2/scripts/qtime.py 2>&1 | grep -v Warn | grep "us " | tee -a $R/qtime.log
  echo "$code rc=$? at ${SECONDS}s"
done; done
