"""Private selectors (hook ``dpreg_register_selectors``): choices among
candidates (exponential mechanism, AboveThreshold) and private
hyper-parameter selection."""
