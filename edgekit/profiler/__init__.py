"""The profiler: timing loop, latency statistics, memory and energy windows, one report."""
from edgekit.profiler.run import ProfileSettings, profile
from edgekit.profiler.stats import LatencyStats, latency_stats, nearest_rank
from edgekit.profiler.timing import TimingPlan

__all__ = ["LatencyStats", "ProfileSettings", "TimingPlan", "latency_stats", "nearest_rank",
           "profile"]
