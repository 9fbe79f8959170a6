"""Continual-release noise mechanisms (hook ``dpreg_register_noises``): one
module per mechanism, each a :class:`dpreg.interfaces.NoiseMechanism` for
noisy prefix sums of a stream of increments."""
