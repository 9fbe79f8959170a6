"""Every built-in loss and noise mechanism passes the public contracts of
dpreg.testing (the same classes third-party packages subclass)."""
import pytest

from dpreg.interfaces import LinearModelLoss
from dpreg.registry import get_registry
from dpreg.testing import LossContract, NoiseContract

_reg = get_registry()


@pytest.fixture(params=[n for n in _reg.names("loss")  # linear-model contract; mlp: tests/test_mlp.py
                        if isinstance(_reg.get("loss", n), LinearModelLoss)])
def _loss_name(request):
    return request.param


class TestEveryBuiltinLoss(LossContract):
    @pytest.fixture(autouse=True)
    def _bind(self, _loss_name):
        self.loss_name = _loss_name


@pytest.fixture(params=_reg.names("noise"))
def _noise_name(request):
    return request.param


class TestEveryNoise(NoiseContract):
    @pytest.fixture(autouse=True)
    def _bind(self, _noise_name):
        self.noise_name = _noise_name


def test_contracts_cover_every_registered_loss_and_noise():
    # meta-test: a newly registered built-in is covered automatically
    assert set(_reg.names("loss")) >= {"logistic", "sigmoid", "logistic-nonconvex-reg", "sigmoid-l2",
                                       "lowy-synthetic", "phase-retrieval"}
    assert "gaussian" in _reg.names("noise")
