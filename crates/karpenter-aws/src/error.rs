//! Errors of the AWS provider. API failures keep the SDK error as their source; [`Error::retryable`]
//! tells a controller whether to back off and retry or to report a condition and wait for a change.

use std::error::Error as StdError;

use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An AWS API call failed (after the SDK's own retries).
    #[error("{operation} failed: {}", api_detail(.code.as_deref(), .message))]
    Api {
        operation: &'static str,
        /// The AWS error code (`UnauthorizedOperation`, `RequestLimitExceeded`, ...), when the
        /// service answered.
        code: Option<String>,
        message: String,
        /// Timeouts, connection failures, throttling and 5xx answers.
        transient: bool,
        #[source]
        source: BoxError,
    },
    /// Nothing in the account matches the selector terms; the message says what was looked for.
    #[error("{message}")]
    NotFound { message: String },
    /// The `amiSelectorTerms` alias is malformed or not available for this Kubernetes version.
    #[error("{message}")]
    UnsupportedAlias { message: String },
    /// The instance is not this cluster's (no `kubernetes.io/cluster/<name>=owned` tag): never
    /// terminated by it.
    #[error("{message}")]
    NotOwned { message: String },
    /// The SDK could not be configured (no region, bad endpoint).
    #[error("AWS client configuration: {message}")]
    Config { message: String },
}

/// `Code: message` when AWS answered with a code, else the message.
fn api_detail(code: Option<&str>, message: &str) -> String {
    match code {
        Some(code) => format!("{code}: {message}"),
        None => message.to_string(),
    }
}

/// Error codes AWS uses for throttling and server-side trouble; the SDK's standard retry strategy
/// retries these too, so reaching us means its attempts ran out and a later retry may still work.
const TRANSIENT_CODES: [&str; 8] = [
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
];

impl Error {
    /// Whether retrying the same call later may succeed without anything being changed by a user.
    pub fn retryable(&self) -> bool {
        match self {
            Error::Api { transient, .. } => *transient,
            Error::NotFound { .. }
            | Error::UnsupportedAlias { .. }
            | Error::NotOwned { .. }
            | Error::Config { .. } => false,
        }
    }

    /// The AWS error code of an API failure.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Api { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// Wraps an SDK error of `operation`, classifying it for [`Error::retryable`].
    pub fn from_sdk<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
        R: std::fmt::Debug + Send + Sync + 'static,
    {
        let (code, message, transient) = match &err {
            SdkError::TimeoutError(_) => (None, "timed out".to_string(), true),
            SdkError::DispatchFailure(f) => (
                None,
                format!("could not reach the endpoint ({f:?})"),
                f.is_timeout() || f.is_io(),
            ),
            SdkError::ResponseError(_) => (None, "unreadable response".to_string(), true),
            SdkError::ConstructionFailure(_) => (None, "request not built".to_string(), false),
            SdkError::ServiceError(service) => {
                let meta = service.err();
                let code = meta.code().map(str::to_string);
                let transient = code
                    .as_deref()
                    .is_some_and(|c| TRANSIENT_CODES.contains(&c));
                (
                    code,
                    meta.message().unwrap_or("no message").to_string(),
                    transient,
                )
            }
            // The SDK error is the source, printed after this one: not copied into the message.
            _ => (None, "SDK error".to_string(), false),
        };
        Error::Api {
            operation,
            code,
            message,
            transient,
            source: Box::new(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_and_alias_errors_are_not_retryable() {
        assert!(
            !Error::NotFound {
                message: "no subnet".into()
            }
            .retryable()
        );
        assert!(
            !Error::UnsupportedAlias {
                message: "al2".into()
            }
            .retryable()
        );
    }

    #[test]
    fn api_errors_carry_code_and_source() {
        let err = Error::Api {
            operation: "DescribeSubnets",
            code: Some("UnauthorizedOperation".into()),
            message: "You are not authorized".into(),
            transient: false,
            source: "denied".into(),
        };
        assert_eq!(
            err.to_string(),
            "DescribeSubnets failed: UnauthorizedOperation: You are not authorized"
        );
        assert_eq!(err.code(), Some("UnauthorizedOperation"));
        assert!(StdError::source(&err).is_some());
        assert!(!err.retryable());
    }
}
