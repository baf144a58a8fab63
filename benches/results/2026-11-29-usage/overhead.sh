#!/bin/bash
# How the overhead figures of benches/RESULTS.md ("How big is a prefix") were taken: /tmp/eb-old is
# engine_bench built at a32c382 (before usage counts), /tmp/eb-new at 2035226 (with them).
out=/tmp/overhead
mkdir -p $out
for rep in 1 2 3; do
  for variant in old new new-size; do
    case $variant in
      old) bin=/tmp/eb-old; env="";;
      new) bin=/tmp/eb-new; env="";;
      new-size) bin=/tmp/eb-new; env="HOLT_BENCH_WEIGH=size";;
    esac
    env $env $bin --engine holt-core --keys 1000000 --dir /tmp/holt-overhead > $out/$variant-$rep.json 2> $out/$variant-$rep.err
  done
done
echo finished > $out/done
