"""Who an ``s3://`` staging signs as: botocore's own credential providers, fed the stager's
environment.

botocore's default chain, cut to what a pod should use, each provider reading the environment
mapping the staging runs with (not ``os.environ`` behind its back): static keys
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``: a Secret), web identity
(``AWS_ROLE_ARN`` and ``AWS_WEB_IDENTITY_TOKEN_FILE``, as EKS IRSA sets them), container
credentials (``AWS_CONTAINER_CREDENTIALS_FULL_URI`` and ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE``,
as EKS Pod Identity sets them). No profile, shared file or instance metadata: on a node, the
metadata service hands out the node's own role. botocore is imported only when called (the
staging extra).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from pulumi_lora._staging._errors import SourceUnauthorized, SourceUnreachable
from pulumi_lora._staging._source import S3Source

__all__ = ["S3CredentialsMissing", "credential_chain", "credential_errors"]

_PROFILE = "pulumi-lora-stager"
"""The profile name the web identity provider reads its settings under (built here, no file)."""
_WEB_IDENTITY = {
    "role_arn": "AWS_ROLE_ARN",
    "web_identity_token_file": "AWS_WEB_IDENTITY_TOKEN_FILE",
    "role_session_name": "AWS_ROLE_SESSION_NAME",
}
"""botocore's web identity settings and the variables it reads them from (as IRSA sets them)."""
_RETRIED = frozenset({"Throttling", "ThrottlingException", "IDPCommunicationError"})


class S3CredentialsMissing(SourceUnauthorized):
    """No credential for a bucket not marked public, or the ones found were refused."""

    advice = (
        "give the stager AWS credentials: a Secret holding AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (source_secret_name), or a ServiceAccount set up for EKS IRSA or "
        "Pod Identity (source_service_account); for a public bucket, set source_public=True to "
        "fetch it without signing"
    )


def credential_chain(session: Any, env: Mapping[str, str], region: str) -> Any:
    """A botocore ``CredentialResolver`` over ``env``: static keys, then web identity (asking
    STS at ``AWS_ENDPOINT_URL_STS`` when ``env`` names one, else the region's), then container
    credentials. ``session``: the botocore session the STS client comes from."""
    from botocore.credentials import (  # noqa: PLC0415 - the staging extra, only for s3://
        AssumeRoleWithWebIdentityProvider,
        ContainerProvider,
        CredentialResolver,
        EnvProvider,
    )

    environ = dict(env)
    identity = {key: environ[var] for key, var in _WEB_IDENTITY.items() if environ.get(var)}
    sts_endpoint = environ.get("AWS_ENDPOINT_URL_STS") or None

    def sts_client(service: str, **kwargs: Any) -> Any:
        return session.create_client(
            service, region_name=region, endpoint_url=sts_endpoint, **kwargs
        )

    return CredentialResolver(
        providers=[
            EnvProvider(environ=environ),
            AssumeRoleWithWebIdentityProvider(
                load_config=lambda: {"profiles": {_PROFILE: identity}},
                client_creator=sts_client,
                profile_name=_PROFILE,
                disable_env_vars=True,  # its own reading of os.environ: the mapping above instead
            ),
            ContainerProvider(environ=environ),
        ]
    )


@contextmanager
def credential_errors(source: S3Source) -> Iterator[None]:
    """The failures of resolving credentials as staging errors: refused or incomplete ones
    (`S3CredentialsMissing`), a credential service that did not answer (`SourceUnreachable`,
    retryable). Messages name the error's kind, never a value of the environment."""
    from botocore import exceptions as boto  # noqa: PLC0415 - the staging extra, only for s3://

    try:
        yield
    except boto.ClientError as exc:  # STS answered the web identity
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        if code in _RETRIED or status >= 500:
            raise SourceUnreachable(
                f"{source.uri}: STS did not answer the web identity ({code or status})"
            ) from None
        raise S3CredentialsMissing(f"{source.uri}: STS refused the web identity ({code})") from None
    except (boto.ConnectionError, boto.HTTPClientError, boto.CredentialRetrievalError) as exc:
        raise SourceUnreachable(
            f"{source.uri}: the credentials could not be fetched ({type(exc).__name__})"
        ) from None
    except boto.BotoCoreError as exc:  # incomplete settings: a token file without a role, ...
        raise S3CredentialsMissing(
            f"{source.uri}: the AWS credentials of the stager's environment are incomplete "
            f"({type(exc).__name__})"
        ) from None
    except OSError as exc:  # the web identity's token file
        raise S3CredentialsMissing(
            f"{source.uri}: the web identity token file could not be read "
            f"({exc.strerror or type(exc).__name__})"
        ) from None
