"""The run layer: render units into Ansible plays, run them through ansible-runner, record
everything in the state store, resume after a failure or a kill."""
