#!/usr/bin/env bash
# auto against forced fused in latency mode at decode sizes: the previous code (c678ed4) and this code, same machine.
R=/tmp/res16g; source .scratch/s16/common.sh
for code in old new old2 new2; do
  case $code in old*) P=$PWD/.scratch/old;; *) P=$PWD;; esac
  PYTHONPATH=$P timeout 100 python3 -m fluxlite.profile --tune --nproc 2 --impls fused,auto --rounds 7 --out $R/$code --no-progress \
    --shape ar:16,14336,8192 --shape ar:1,4096,4096 --shape ag:256,4096,4096 --shape ar:32,5120,5120 2>&1 | grep -v '^W1\|Warning\|enable_symm' > $R/$code.log
  echo "## $code"; python3 -c "
import json; d=json.load(open('$R/$code/profile.json'))
for r in d['rows']:
    t=r['times_ms']; print(r['op'], r['M'], r['K'], r['N'], 'lat us fused %.0f auto %.0f seq %.0f | host fused %.0f auto %.0f | tp fused %.1f auto %.1f | auto' % (t['fused']['latency']*1e3, t['auto']['latency']*1e3, t['sequential']['latency']*1e3, t['fused']['host']*1e3, t['auto']['host']*1e3, t['fused']['throughput']*1e3, t['auto']['throughput']*1e3), r['auto'].get('label'), r['auto'].get('modes'))"
done
