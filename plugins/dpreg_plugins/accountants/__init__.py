"""Privacy accountants (hook ``dpreg_register_accountants``)."""
