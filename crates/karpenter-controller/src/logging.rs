//! Structured logs: JSON (default, like upstream's zap production config) or text.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::settings::LogFormat;

/// Installs the global subscriber. `level` is `LOG_LEVEL` (`debug`, `info`, `error`, or any
/// `EnvFilter` directive such as `info,karpenter_controller=debug`).
pub fn init(level: &str, format: LogFormat) -> crate::Result<()> {
    let filter = EnvFilter::try_new(level).map_err(|e| {
        crate::Error::Logging(format!(
            "LOG_LEVEL {level:?} is not a level or filter ({e}); use debug, info or error"
        ))
    })?;
    // Colours only for people at a terminal, not in files or log collectors.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| crate::Error::Logging(e.to_string()))
}
