#!/usr/bin/env bash
# The profiler on the old tree ($OLD) and this one, alternating old new old new, sequential and fused:
#   R=<results> OLD=<old tree> bash ab_profile.sh <prefix> --shape ... --shape ...
prefix=$1; shift
for v in old new old new; do
  if [ $v = old ]; then D=$OLD; else D=$PWD; fi
  (cd $D && PYTHONPATH=$D:/tmp/site timeout 110 python3 -m fluxlite.profile "$@" --nproc 2 --impls sequential,fused \
    --rounds 7 --time-limit 100 --no-progress --out $R/${prefix}_$v-$SECONDS 2>&1 | grep -v '^W1\|Warning\|enable_symm' \
    > $R/${prefix}_$v-$SECONDS.log); echo "$prefix $v rc=$? at ${SECONDS}s"
done
