R=/tmp/r4; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
timeout 150 torchrun --standalone --nproc-per-node 2 benchmarks/2026-11-28-h200x2-b/scripts/hostprof.py > $R/host.log 2>&1; echo "host rc=$? at ${SECONDS}s"; grep "us per call" $R/host.log; tail -3 $R/host.log
