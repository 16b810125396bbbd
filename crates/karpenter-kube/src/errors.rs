//! What a failed Kubernetes API call means for the caller.

use std::future::Future;

use crate::timeouts;

/// The HTTP status code of an API error (`None` for transport errors, timeouts, decoding).
pub fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// 404: the object (or its namespace) does not exist.
pub fn is_not_found(err: &kube::Error) -> bool {
    status_code(err) == Some(404)
}

/// 409: a write lost a race (stale resourceVersion, or the object already exists). Look again.
pub fn is_conflict(err: &kube::Error) -> bool {
    status_code(err) == Some(409)
}

/// 410: the resourceVersion asked for is too old (a watch or list must start over).
pub fn is_gone(err: &kube::Error) -> bool {
    status_code(err) == Some(410)
}

/// `Ok(None)` for a 404, the value otherwise: for calls where "already gone" is success.
pub fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Runs a delete call (bounded by [`timeouts::API_CALL_TIMEOUT`]); an object that is already
/// gone counts as deleted. Returns whether this call found the object.
///
/// ```ignore
/// delete_ignoring_not_found(api.delete(name, &DeleteParams::default())).await?;
/// ```
pub async fn delete_ignoring_not_found<T>(
    delete: impl Future<Output = Result<T, kube::Error>>,
) -> Result<bool, kube::Error> {
    Ok(ignore_not_found(timeouts::api(delete).await)?.is_some())
}

#[cfg(test)]
pub(crate) fn api_error(code: u16) -> kube::Error {
    kube::Error::Api(Box::new(
        kube::core::Status::failure("test", "Test").with_code(code),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_are_told_apart() {
        assert!(is_not_found(&api_error(404)));
        assert!(!is_not_found(&api_error(409)));
        assert!(is_conflict(&api_error(409)));
        assert!(!is_conflict(&api_error(404)));
        assert!(is_gone(&api_error(410)));
        assert!(!is_gone(&api_error(500)));
        assert_eq!(status_code(&api_error(503)), Some(503));
    }

    #[test]
    fn errors_without_a_status_have_no_code() {
        let timed_out =
            <kube::Error as timeouts::TimeoutError>::timed_out(timeouts::API_CALL_TIMEOUT);
        assert_eq!(status_code(&timed_out), None);
        assert!(!is_not_found(&timed_out));
    }

    #[tokio::test(start_paused = true)]
    async fn deleting_what_is_gone_succeeds_and_other_errors_stay() {
        assert!(
            delete_ignoring_not_found(async { Ok::<_, kube::Error>(()) })
                .await
                .unwrap()
        );
        assert!(
            !delete_ignoring_not_found(async { Err::<(), _>(api_error(404)) })
                .await
                .unwrap()
        );
        let err = delete_ignoring_not_found(async { Err::<(), _>(api_error(500)) })
            .await
            .unwrap_err();
        assert_eq!(status_code(&err), Some(500));
        assert_eq!(ignore_not_found(Ok::<_, kube::Error>(3)).unwrap(), Some(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_that_never_answers_times_out() {
        let err = delete_ignoring_not_found(std::future::pending::<Result<(), kube::Error>>())
            .await
            .unwrap_err();
        assert!(timeouts::is_timeout(&err));
    }
}
