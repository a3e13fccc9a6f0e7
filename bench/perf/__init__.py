"""Benchmarking tools (the engine benchmark, the forward's roofline, the KV cache's cost): above the runner and the
reports, whose parts they time and draw; nothing below imports them."""
