# a directory, not a package to import: the lab puts it on the node Python's PYTHONPATH
