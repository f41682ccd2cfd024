from toolkit.cli import run

run()
