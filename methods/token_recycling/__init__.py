"""Token Recycling: the proposer, and the calibration that measures per-rank acceptance for built trees."""
