"""`manage.py api_token create USERNAME --name NAME` prints the new token alone on its last line;
`list USERNAME` and `revoke TOKEN_ID` for operators."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import ApiToken
from accounts.services.tokens import api_token_create, api_token_revoke, api_tokens_for_user
from core.errors import ApplicationError


class Command(BaseCommand):
    help = "Create, list or revoke API tokens."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="a new token; the token is printed on the last line")
        create.add_argument("username")
        create.add_argument("--name", required=True)
        listing = actions.add_parser("list", help="a user's tokens")
        listing.add_argument("username")
        revoke = actions.add_parser("revoke", help="revoke a token by its id")
        revoke.add_argument("token_id", type=int)

    def handle(self, *args: object, **options: object) -> None:
        action = options["action"]
        if action == "revoke":
            token = ApiToken.objects.filter(pk=options["token_id"]).first()
            if token is None:
                raise CommandError(f"no token {options['token_id']}")
            api_token_revoke(token=token)
            self.stdout.write(f"revoked token {token.pk} ({token.name}) of {token.user.get_username()}")
            return
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        if action == "list":
            for token in api_tokens_for_user(user=user):
                state = f"revoked {token.revoked:%Y-%m-%d %H:%M}" if token.revoked else "active"
                self.stdout.write(f"{token.pk}\t{token.prefix}…\t{token.name}\t{state}")
            return
        try:
            token, secret = api_token_create(user=user, name=str(options["name"]))
        except ApplicationError as error:
            raise CommandError(error.message) from None
        self.stdout.write(f"token {token.pk} ({token.name}) for {user.get_username()}; shown once:")
        self.stdout.write(secret)
