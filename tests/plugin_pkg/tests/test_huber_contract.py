from dpreg.testing import LossContract


class TestHuber(LossContract):
    loss_name = "huber-hinge"
