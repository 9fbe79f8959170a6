"""Named data sources (hook ``dpreg_register_datasets``)."""
