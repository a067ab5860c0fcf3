# a lab's node-command entry puts this directory on sys.path and imports the client from it
# as a top-level module (nothing of stepwise imported); the server imports the same module
# through the package for the protocol's words
