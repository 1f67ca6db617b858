R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# One GPU (nvidia-h200).
git log --oneline -1 > $R/commit.txt 2>/dev/null
timeout 200 python3 benchmarks/2026-11-28-h200x2-j/scripts/unal.py 0 > $R/unal.txt 2>&1; echo "unal rc=$? at ${SECONDS}s"; cat $R/unal.txt
timeout 150 python3 scripts/bench_gemm.py --shapes 8192,5000,3500 6144,3000,4500 6144,8192,3500 8192,4996,7000 4096,3001,2000 > $R/bench_gemm.txt 2>&1; echo "bench_gemm rc=$? at ${SECONDS}s"; tail -25 $R/bench_gemm.txt
