"""Losses (hook ``dpreg_register_losses``): per-record f(w; z) with declared
constants.  One module per model family; ``linear`` holds the linear-model
losses phi(<x, w>, y) + psi(w) that the kernels in ``dpreg_kernels.linear_model`` serve."""
