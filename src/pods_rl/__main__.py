from pods_rl.cli import app

app()
