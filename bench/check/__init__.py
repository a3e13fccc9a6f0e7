"""Checks of a machine and of every method on it (`make gpu-check`): each registered method on a device, AR against
HF generate, the engine's eager and graph regimes side by side. Above the runner and the cost model, whose parts
they drive; below the benchmarking tools (bench/perf) that reuse them."""
