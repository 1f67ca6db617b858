R=/tmp/r6; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
# The timing test alone, then the Megatron training files in two lanes.
UNTIL=250; source benchmarks/2026-11-28-h200x2-h/scripts/lane.sh
lane tests/test_profile_cli.py:110
lane tests/test_train_gpt.py:110 &
lane tests/test_parallel_megatron_ddp.py:110 &
wait
cat $R/summary.txt
echo "done at ${SECONDS}s"
