"""The static HTML report: pages rendered from Jinja2 templates, and depth charts."""

from __future__ import annotations

from actviz.report.blocks import (
    Banner as Banner,
)
from actviz.report.blocks import (
    MetaRow as MetaRow,
)
from actviz.report.blocks import (
    by_name as by_name,
)
from actviz.report.blocks import (
    run_meta as run_meta,
)
from actviz.report.blocks import (
    run_warnings as run_warnings,
)
from actviz.report.blocks import (
    weights_banner as weights_banner,
)
from actviz.report.charts import (
    depth_chart as depth_chart,
)
from actviz.report.diff import diff_page as diff_page
from actviz.report.markup import (
    environment as environment,
)
from actviz.report.markup import (
    num as num,
)
from actviz.report.markup import (
    pct as pct,
)
from actviz.report.markup import (
    render as render,
)
from actviz.report.markup import (
    shape_text as shape_text,
)
from actviz.report.markup import (
    url as url,
)
from actviz.report.markup import (
    warm_up as warm_up,
)
from actviz.report.optimize import build_optimize_report as build_optimize_report
from actviz.report.pages import (
    LINKED_FIRST as LINKED_FIRST,
)
from actviz.report.pages import (
    LISTED as LISTED,
)
from actviz.report.pages import (
    PAGE_ROWS as PAGE_ROWS,
)
from actviz.report.pages import (
    PER_IMAGE_CHARTS as PER_IMAGE_CHARTS,
)
from actviz.report.pages import (
    ReportImages as ReportImages,
)
from actviz.report.pages import (
    ReportPages as ReportPages,
)
from actviz.report.pages import (
    build_report as build_report,
)
from actviz.report.pages import (
    image_row as image_row,
)
from actviz.report.pages import (
    images_from_manifest as images_from_manifest,
)
from actviz.report.pages import (
    rebuild_run_report as rebuild_run_report,
)
from actviz.report.pages import (
    related_reports as related_reports,
)
from actviz.report.top_images import build_top_images_report as build_top_images_report
