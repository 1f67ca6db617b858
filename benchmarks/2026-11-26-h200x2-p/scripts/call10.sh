#!/usr/bin/env bash
# auto against the best with the warm-up that meets both data halves (this code), 7 shapes.
R=/tmp/res16j; source .scratch/s16/common.sh
timeout 125 python3 -m fluxlite.profile --tune --nproc 2 --impls sequential,decomposed,fused,auto --rounds 5 --out $R/auto_profile --no-progress --time-limit 110 \
  --shape ar:1,8192,8192 --shape ar:16,14336,8192 --shape ar:128,4096,5120 --shape ar:2048,4096,8192 --shape rs:512,4096,4096 \
  --shape ag:256,4096,4096 --shape ag:4096,8192,5120 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/auto_profile.log
python3 -c "
import json; d=json.load(open('$R/auto_profile/profile.json'))
for r in d['rows']:
    a=r.get('auto_vs_best',{}); print(r['op'], r['M'], r['K'], r['N'], 'auto/best tp %.3f lat %.3f' % (a.get('throughput',0), a.get('latency',0)), r['auto'].get('label'), r['auto'].get('modes'))"
