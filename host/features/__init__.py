"""Each capability's glue to the Host, one folder per capability."""
