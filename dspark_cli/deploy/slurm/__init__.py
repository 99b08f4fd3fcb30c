"""The Slurm deploy target: its entry (`target.py`) and the sbatch job it starts (`job.py`)."""
