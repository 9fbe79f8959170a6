"""Only hook implementations live here."""
import click

from dpreg import hookimpl


@hookimpl
def dpreg_register_losses(register):
    from .loss import HuberHinge

    register("huber-hinge", HuberHinge(), summary="Huber-smoothed hinge loss (third-party example)")


@hookimpl
def dpreg_register_commands(cli):
    @click.command("huber-hello")
    def hello():
        """Say hello from the third-party plugin."""
        click.echo("hello from dpreg-huber")

    cli.add_command(hello)
