R=/tmp/r2; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
S="--shape ar:64,8192,8192 --shape ar:256,8192,8192 --shape ar:1024,8192,8192 --shape ar:8192,4096,8192 --shape ar:12001,1000,7880 --shape ar:8192,28672,8192 --shape ar:8192,14336,8192 --shape ar:8192,16384,8192 --shape ar:6144,11000,5000 --shape ar:9000,6000,4100 --shape ar:4096,13824,8192 --shape ar:10240,7000,6000"
timeout 150 python3 -m fluxlite.profile --nproc 2 $S --rounds 5 --no-progress --out $R/prof_ar > $R/prof_ar.log 2>&1; echo "prof_ar rc=$? at ${SECONDS}s"
S="--shape ag:8192,5000,7000 --shape ag:12000,8192,5504 --shape ag:6000,7000,10000 --shape rs:8192,4968,7832 --shape rs:6144,9136,10560 --shape rs:10000,7000,3000"
timeout 150 python3 -m fluxlite.profile --nproc 2 $S --rounds 5 --no-progress --out $R/prof_agrs > $R/prof_agrs.log 2>&1; echo "prof_agrs rc=$? at ${SECONDS}s"
timeout 110 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --no-sequence-parallel --ceiling --out $R/gpt_nosp.json > $R/gpt_nosp.log 2>&1; echo "gpt nosp rc=$? at ${SECONDS}s"
timeout 110 torchrun --standalone --nproc-per-node 2 scripts/bench_gpt.py --out $R/gpt_sp.json > $R/gpt_sp.log 2>&1; echo "gpt sp rc=$? at ${SECONDS}s"
