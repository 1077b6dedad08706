"""Per-layer statistics of activations, anomaly flags, and the stats.json / stats.csv /
stats.parquet files."""

from __future__ import annotations

from actviz.statistics.anomalies import (
    FLAG_KINDS,
    Flag,
    Thresholds,
    find_flags,
    first_bad_layer,
    flag_anomalies,
    flag_counts,
    judges_dead,
    parse_kinds,
)
from actviz.statistics.collect import stats_callback
from actviz.statistics.compute import compute_stats
from actviz.statistics.layerstats import CSV_FIELDS, RUN_KEY, STAT_FIELDS, LayerStats
from actviz.statistics.running import WORST, RunningLayer, RunningStats
from actviz.statistics.sketch import Sketch
from actviz.statistics.table import StatsTable

__all__ = [
    "CSV_FIELDS",
    "FLAG_KINDS",
    "Flag",
    "LayerStats",
    "RUN_KEY",
    "RunningLayer",
    "RunningStats",
    "STAT_FIELDS",
    "Sketch",
    "StatsTable",
    "Thresholds",
    "WORST",
    "compute_stats",
    "find_flags",
    "first_bad_layer",
    "flag_anomalies",
    "flag_counts",
    "judges_dead",
    "parse_kinds",
    "stats_callback",
]
