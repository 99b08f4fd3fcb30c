"""Deploy targets beyond this machine: a Slurm batch job and Kubernetes manifests, both running
the node layout's commands (one per node rank) with the rank and head address the engine gives
at run time. Rendering is pure; submitting, waiting and cancelling live in their own modules."""
