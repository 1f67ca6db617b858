#!/usr/bin/env bash
# auto at the old 16 and new 18 shapes: latency as the median of three calls after an untimed one,
# no capture query for a repeated call in a declared mode.
R=/tmp/res13e; source benchmarks/2026-11-26-h200x2-m/scripts/common.sh
source $HERE/auto_shapes.sh  # OLD, NEW
prof auto_new "$NEW"
prof auto_old "$OLD"
