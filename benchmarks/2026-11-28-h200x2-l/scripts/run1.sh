R=/tmp/r1; source benchmarks/2026-11-27-h200x2-o/scripts/common.sh; export R
git log --oneline -1 > $R/commit.txt 2>/dev/null
CUDA_VISIBLE_DEVICES=0 timeout 120 python3 benchmarks/2026-11-28-h200x2-l/scripts/padbench.py > $R/padbench.txt 2>&1; echo "padbench rc=$? ${SECONDS}s"; cat $R/padbench.txt | grep -v Warn | tail -8
timeout 150 torchrun --standalone --nproc-per-node 2 scripts/trace_calls.py --shapes rs:14634,11037,1804 rs:8192,4099,3001 rs:15646,13227,6639 rs:10900,9104,8589 ag:12000,4100,6001 ag:8192,5000,3500 --calls 6 > $R/trace.txt 2>&1; echo "trace rc=$? ${SECONDS}s"
S="--shape ag:8192,5000,3500 --shape ag:12000,4100,6001 --shape rs:8192,4996,7000 --shape rs:10900,9104,8589 --shape rs:8192,4099,3001 --shape ar:4096,3001,2000 --shape ag:5104,8016,7269 --shape rs:15646,13227,6639"
FLUXLITE_CACHE_DIR=$R/cache timeout 200 python3 -m fluxlite.profile $S --nproc 2 --impls sequential,fused,torch_symm_mem --rounds 5 --time-limit 190 --no-progress --out $R/prof > $R/prof.log 2>&1
echo "prof rc=$? at ${SECONDS}s"; grep -v '^W1' $R/prof.log | grep -A12 'op, M x K' | head -14
true
