"""What a compiled forward baked in from its modules' plain attributes is guarded (issue 15):
a float, bool or tuple attribute the forward reads, and a tensor attribute that is not a
registered parameter or buffer, or is a non-persistent buffer (either traced as a constant),
rebound or written in place. Changing one compiles again, with a reason naming the
attribute, and results follow eager's."""
import copy

import numpy as np

import graphnn
from graphnn import nn
from compile_helpers import isolated_cache  # noqa: F401  (autouse fixture)


class _Reads(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale, self.shift, self.window = 0.5, True, (1, 3)
        self.mask = graphnn.ones(4)  # not a buffer: a trace bakes it in
        self.register_buffer("table", graphnn.ones(4), persistent=False)  # baked in too

    def forward(self, x):
        y = self.fc(x) * self.scale * self.mask + self.table
        y = y[:, self.window[0]:self.window[1]]
        return y + 1.0 if self.shift else y


def test_changed_attributes_recompile_with_the_reason_and_follow_eager():
    graphnn.manual_seed(0)
    model = _Reads()
    eager = copy.deepcopy(model)
    model.compile()
    x = graphnn.randn(3, 4)
    changes = [("scale", lambda m: setattr(m, "scale", 2.0)),
               ("shift", lambda m: setattr(m, "shift", False)),
               ("window", lambda m: setattr(m, "window", (0, 4))),
               ("mask", lambda m: m.mask.mul_(3.0)),  # in place: a new version
               ("mask", lambda m: setattr(m, "mask", graphnn.zeros(4))),  # rebound
               ("table", lambda m: m.table.add_(1.0)),
               ("table", lambda m: setattr(m, "table", graphnn.full((4,), 2.0)))]
    with graphnn.no_grad():
        np.testing.assert_allclose(model(x).numpy(), eager(x).numpy(), rtol=1e-6)
        for i, (name, change) in enumerate(changes):
            change(model)
            change(eager)
            np.testing.assert_allclose(model(x).numpy(), eager(x).numpy(), rtol=1e-6,
                                       err_msg=name)
            assert model.forward.compiles == i + 2
            assert f"module attributes of '{name}'" in model.forward.recompile_reasons[-1]
        model.scale = 2.0  # the same value again: no new signature
        model(x)
    assert model.forward.compiles == len(changes) + 1


def test_train_and_eval_reasons_name_the_modules_that_changed():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2))
    model.compile()
    x = graphnn.randn(3, 4)
    with graphnn.no_grad():
        model(x)
        model[1].eval()
        model(x)
    (reason,) = model.forward.recompile_reasons
    assert "train/eval mode of '1' True -> False" in reason
    assert "'0'" not in reason and "'2'" not in reason
