"""The built-in dpreg plugins, registered through the same hooks as third-party
packages (see ``dpreg.registry.DEFAULT_PLUGINS``)."""
