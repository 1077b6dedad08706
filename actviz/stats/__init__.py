"""Per-layer statistics of activations, anomaly flags, and the stats.json / stats.csv files."""

from __future__ import annotations

from actviz.stats.anomalies import (
    FLAG_KINDS as FLAG_KINDS,
)
from actviz.stats.anomalies import (
    Flag as Flag,
)
from actviz.stats.anomalies import (
    Thresholds as Thresholds,
)
from actviz.stats.anomalies import (
    find_flags as find_flags,
)
from actviz.stats.anomalies import (
    first_bad_layer as first_bad_layer,
)
from actviz.stats.anomalies import (
    flag_anomalies as flag_anomalies,
)
from actviz.stats.anomalies import (
    parse_kinds as parse_kinds,
)
from actviz.stats.collect import (
    stats_callback as stats_callback,
)
from actviz.stats.collect import (
    write_stats as write_stats,
)
from actviz.stats.compute import (
    PERCENTILE_EXACT_LIMIT as PERCENTILE_EXACT_LIMIT,
)
from actviz.stats.compute import (
    compute_stats as compute_stats,
)
from actviz.stats.compute import (
    default_channel_dim as default_channel_dim,
)
from actviz.stats.files import (
    CSV_FIELDS as CSV_FIELDS,
)
from actviz.stats.files import (
    RUN_KEY as RUN_KEY,
)
from actviz.stats.files import (
    stats_rows as stats_rows,
)
from actviz.stats.files import (
    to_csv as to_csv,
)
from actviz.stats.files import (
    to_json as to_json,
)
from actviz.stats.layerstats import (
    STAT_FIELDS as STAT_FIELDS,
)
from actviz.stats.layerstats import (
    LayerStats as LayerStats,
)
from actviz.stats.layerstats import (
    aggregate as aggregate,
)
from actviz.stats.layerstats import (
    aggregate_run as aggregate_run,
)
