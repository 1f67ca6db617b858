R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
mkdir -p $R/t
t() { local lim=$1 f=$2; shift 2; FLUXLITE_GPU_RANKS=2 timeout $lim python3 -m pytest -m gpu -x -q -p no:cacheprovider --durations=5 tests/$f.py "$@" > $R/t/$f.log 2>&1; echo "$f rc=$? at ${SECONDS}s" >> $R/t/rc.log; }
t 260 test_gpu_fused
t 60 test_gpu_safety -k replayed
t $((420 - SECONDS)) test_parallel_gpu
cat $R/t/rc.log; for f in $R/t/test*.log; do echo "== $f"; tail -3 $f; done
timeout $((540 - SECONDS)) python3 -m fluxlite.profile --shape ag:1748,3944,3264 --shape ag:182,7977,7147 --shape ag:7998,5318,3954 --shape rs:28,4336,5840 --shape rs:15306,6922,5996 --shape rs:64,7314,5182 --shape ag:294,8616,8336 --shape rs:12710,7456,4409 --shape ag:9888,2706,7527 --shape ag:12678,5128,6752 --shape rs:12,2933,3796 --shape rs:2232,3845,1045 \
  --nproc 2 --impls fused,torch_symm_mem,auto --rounds 5 --time-limit $((530 - SECONDS)) --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A14 'op, M x K' | head -15
