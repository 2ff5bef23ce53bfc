"""Stand-in for the `datasets` package: SGLang 0.5.17's bench_serving imports it at module level (for MMMU) even
for --dataset-name random-ids; the device machine has no network to fetch any dataset anyway."""


def load_dataset(*args, **kwargs):
    raise RuntimeError("datasets is stubbed on the device machine: only random-ids workloads run there")
