# a directory, not a package to import: a lab's node-command entry puts it on sys.path
