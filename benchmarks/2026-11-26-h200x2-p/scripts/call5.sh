#!/usr/bin/env bash
R=/tmp/res16e; source .scratch/s16/common.sh
timeout 150 torchrun --standalone --nproc-per-node 2 .scratch/s16/ag_prof.py > $R/ag_prof.log 2>&1; grep -v "^W1\|Warning\|enable_symm" $R/ag_prof.log | grep -E "^==|tottime|fluxlite|torch|built-in" | cut -c1-160 | head -90
