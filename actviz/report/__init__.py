"""The static HTML report: pages, their blocks, markup and depth charts."""

from __future__ import annotations

from actviz.report.blocks import (
    by_name as by_name,
)
from actviz.report.blocks import (
    failed_tables as failed_tables,
)
from actviz.report.blocks import (
    find_layer as find_layer,
)
from actviz.report.blocks import (
    flag_list as flag_list,
)
from actviz.report.blocks import (
    kinds_of as kinds_of,
)
from actviz.report.blocks import (
    layer_pictures as layer_pictures,
)
from actviz.report.blocks import (
    layer_table as layer_table,
)
from actviz.report.blocks import (
    run_meta as run_meta,
)
from actviz.report.blocks import (
    run_warnings as run_warnings,
)
from actviz.report.blocks import (
    stats_table as stats_table,
)
from actviz.report.blocks import (
    summary_line as summary_line,
)
from actviz.report.blocks import (
    weights_banner as weights_banner,
)
from actviz.report.charts import (
    DepthChart as DepthChart,
)
from actviz.report.markup import (
    badges as badges,
)
from actviz.report.markup import (
    esc as esc,
)
from actviz.report.markup import (
    html_page as html_page,
)
from actviz.report.markup import (
    image_tag as image_tag,
)
from actviz.report.markup import (
    link_to as link_to,
)
from actviz.report.markup import (
    num as num,
)
from actviz.report.markup import (
    pct as pct,
)
from actviz.report.markup import (
    shape_text as shape_text,
)
from actviz.report.markup import (
    url as url,
)
from actviz.report.pages import (
    PER_IMAGE_CHARTS as PER_IMAGE_CHARTS,
)
from actviz.report.pages import (
    build_report as build_report,
)
