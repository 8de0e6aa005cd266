"""kernels/ carries the model shapes as plain data; they must equal the simulator's presets."""

from kernels.shapes import MODEL_SHAPES
from sim.presets import MODEL_PRESETS


def test_kernel_shapes_equal_the_simulator_presets():
    presets = {name: MODEL_PRESETS[name] for name in MODEL_PRESETS}
    assert presets == MODEL_SHAPES
