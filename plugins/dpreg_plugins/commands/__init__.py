"""Extra ``dpreg`` CLI commands (hook ``dpreg_register_commands``)."""
