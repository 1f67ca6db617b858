#!/usr/bin/env bash
# auto where its latency choice was a config other than the default, or lost: 14 shapes, the settled-best rule.
R=/tmp/res13f; source benchmarks/2026-11-26-h200x2-m/scripts/common.sh
prof auto "ag:48,5120,13824 ag:360,3584,18944 rs:2,6144,8192 ag:2,8192,4096 ar:1,8192,8192 ag:1200,5120,10240 rs:4,8192,5120
   ag:512,8192,4096 rs:1024,4096,8192 rs:3000,7168,7168 ag:6,4096,12288 ag:2048,4096,11008 ag:16384,5120,3456 rs:4400,6144,10240" 150
