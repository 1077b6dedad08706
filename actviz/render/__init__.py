"""Pictures: pure arrays in, uint8 pictures out (normalize, palette, tiling, legend, grid,
overlay), and the drawing of one image's captured layers."""

from __future__ import annotations

from actviz.render.draw import (
    DrawOptions as DrawOptions,
)
from actviz.render.draw import (
    ImageJob as ImageJob,
)
from actviz.render.draw import (
    draw_image as draw_image,
)
from actviz.render.draw import (
    model_view as model_view,
)
from actviz.render.draw import (
    render_activation as render_activation,
)
from actviz.render.draw import (
    summaries as summaries,
)
from actviz.render.draw import (
    thumbnail_path as thumbnail_path,
)
from actviz.render.grid import (
    Norm as Norm,
)
from actviz.render.grid import (
    Order as Order,
)
from actviz.render.grid import (
    render_grid as render_grid,
)
from actviz.render.grid import (
    render_vector as render_vector,
)
from actviz.render.legend import (
    HEADER_MIN_WIDTH as HEADER_MIN_WIDTH,
)
from actviz.render.legend import (
    Header as Header,
)
from actviz.render.legend import (
    fmt_value as fmt_value,
)
from actviz.render.legend import (
    line_height as line_height,
)
from actviz.render.legend import (
    new_canvas as new_canvas,
)
from actviz.render.legend import (
    paste_text as paste_text,
)
from actviz.render.legend import (
    text_width as text_width,
)
from actviz.render.normalize import (
    BoolArray as BoolArray,
)
from actviz.render.normalize import (
    F32Array as F32Array,
)
from actviz.render.normalize import (
    F64Array as F64Array,
)
from actviz.render.normalize import (
    as_float32 as as_float32,
)
from actviz.render.normalize import (
    channel_minmax as channel_minmax,
)
from actviz.render.normalize import (
    check_choice as check_choice,
)
from actviz.render.normalize import (
    check_clip as check_clip,
)
from actviz.render.normalize import (
    check_value_range as check_value_range,
)
from actviz.render.normalize import (
    flat_percentiles as flat_percentiles,
)
from actviz.render.normalize import (
    is_signed as is_signed,
)
from actviz.render.normalize import (
    map_levels as map_levels,
)
from actviz.render.normalize import (
    order_scores as order_scores,
)
from actviz.render.normalize import (
    range_is_signed as range_is_signed,
)
from actviz.render.normalize import (
    row_percentiles as row_percentiles,
)
from actviz.render.overlay import (
    blend as blend,
)
from actviz.render.overlay import (
    cam_panel as cam_panel,
)
from actviz.render.overlay import (
    input_view as input_view,
)
from actviz.render.overlay import (
    resized_size as resized_size,
)
from actviz.render.overlay import (
    upsample as upsample,
)
from actviz.render.palette import (
    BACKGROUND as BACKGROUND,
)
from actviz.render.palette import (
    CENTER_LEVEL as CENTER_LEVEL,
)
from actviz.render.palette import (
    N_LEVELS as N_LEVELS,
)
from actviz.render.palette import (
    NONFINITE as NONFINITE,
)
from actviz.render.palette import (
    SPARE as SPARE,
)
from actviz.render.palette import (
    TEXT as TEXT,
)
from actviz.render.palette import (
    GridImage as GridImage,
)
from actviz.render.palette import (
    U8Array as U8Array,
)
from actviz.render.palette import (
    choose_cmap as choose_cmap,
)
from actviz.render.palette import (
    colormap_lut as colormap_lut,
)
from actviz.render.palette import (
    palette_for as palette_for,
)
from actviz.render.tiling import (
    GAP as GAP,
)
from actviz.render.tiling import (
    tile_grid as tile_grid,
)
