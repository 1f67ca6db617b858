#!/usr/bin/env bash
R=/tmp/res16a; source .scratch/s16/common.sh
python3 -c "import os; print(os.cpu_count())"; lscpu | grep -i "model name" | tee -a $R/gpus.txt
timeout 200 torchrun --standalone --nproc-per-node 2 .scratch/s16/host_prof.py "1,14336,8192 16,4096,4096 256,8192,8192" > $R/host_prof.log 2>&1; tail -3 $R/host_prof.log
timeout 150 python3 -m pytest -q -m gpu tests/test_profile_cli.py -k llama3 -x > $R/profile_cli.log 2>&1; tail -3 $R/profile_cli.log
