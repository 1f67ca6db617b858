R=/tmp/r3; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
SH=4096x13824x8192,8192x14336x8192,6144x11000x5000 timeout 120 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-b/scripts/lat_ar.py > $R/lat.log 2>&1; echo "lat rc=$? at ${SECONDS}s"; grep "^rank" $R/lat.log
