"""Gradients: the gradient recorder, gradient grids, Grad-CAM, and gradient-flow charts."""

from __future__ import annotations

from actviz.gradients.backward import (
    backward as backward,
)
from actviz.gradients.backward import (
    choose_cam_keys as choose_cam_keys,
)
from actviz.gradients.backward import (
    write_flow_chart as write_flow_chart,
)
from actviz.gradients.backward import (
    write_run_flow_chart as write_run_flow_chart,
)
from actviz.gradients.cam import (
    CamLayout as CamLayout,
)
from actviz.gradients.cam import (
    ClassCam as ClassCam,
)
from actviz.gradients.cam import (
    class_cams as class_cams,
)
from actviz.gradients.cam import (
    grad_cam as grad_cam,
)
from actviz.gradients.cam import (
    to_nchw as to_nchw,
)
from actviz.gradients.core import (
    GradientResult as GradientResult,
)
from actviz.gradients.core import (
    compute_gradients as compute_gradients,
)
from actviz.gradients.core import (
    resolve_targets as resolve_targets,
)
from actviz.gradients.flowchart import (
    EXPLODING as EXPLODING,
)
from actviz.gradients.flowchart import (
    VANISHING as VANISHING,
)
from actviz.gradients.flowchart import (
    gradient_flow_png as gradient_flow_png,
)
from actviz.gradients.recorder import (
    GradientCapture as GradientCapture,
)
from actviz.gradients.recorder import (
    GradientRecorder as GradientRecorder,
)
