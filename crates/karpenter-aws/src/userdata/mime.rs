//! The MIME multipart documents AL2 and AL2023 nodes read their user data from (cloud-init and
//! nodeadm both take `multipart/mixed`). Upstream writes the boundary `//` and strips `\r`; we do
//! the same so a user's parts survive a round trip byte for byte.

use super::UserDataError;

/// The boundary upstream uses for every document it writes.
pub const BOUNDARY: &str = "//";
pub const SHELL_SCRIPT: &str = "text/x-shellscript; charset=\"us-ascii\"";
pub const NODE_CONFIG: &str = "application/node.eks.aws";

/// One part of a multipart document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub content_type: String,
    pub body: String,
}

/// Whether `text` is a MIME document (as opposed to a bare script or config).
pub fn is_mime(text: &str) -> bool {
    let start = text.trim_start();
    starts_with_ignore_case(start, "MIME-Version:")
        || starts_with_ignore_case(start, "Content-Type:")
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix))
}

/// Splits `head` (header lines) from the body at the first blank line.
fn split_headers(text: &str) -> (&str, &str) {
    match text.find("\n\n") {
        Some(at) => (&text[..at], &text[at + 2..]),
        None => (text, ""),
    }
}

/// The value of header `name` (case-insensitive) among `headers`.
fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
    headers.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim()
            .eq_ignore_ascii_case(name)
            .then_some(value.trim())
    })
}

/// The `boundary` parameter of a `Content-Type: multipart/...` value.
fn boundary_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (key, value) = param.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_string())
    })
}

/// Parses a `multipart/*` document into its parts, in order.
pub fn parse(text: &str) -> Result<Vec<Part>, UserDataError> {
    let text = text.replace('\r', "");
    let (headers, body) = split_headers(text.trim_start());
    let content_type = header(headers, "Content-Type").ok_or_else(|| {
        UserDataError::Mime("user data starts like MIME but has no Content-Type header".into())
    })?;
    let boundary = boundary_of(content_type).ok_or_else(|| {
        UserDataError::Mime(format!(
            "Content-Type {content_type:?} of the user data has no boundary"
        ))
    })?;
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut closed = false;
    // Everything before the first delimiter is preamble, ignored as RFC 2046 says.
    for chunk in body.split(&delimiter).skip(1) {
        if chunk.starts_with("--") {
            closed = true;
            break;
        }
        let chunk = chunk.strip_prefix('\n').unwrap_or(chunk);
        let (part_headers, part_body) = split_headers(chunk);
        let content_type = header(part_headers, "Content-Type")
            .unwrap_or("text/plain")
            .to_string();
        parts.push(Part {
            content_type,
            body: part_body
                .strip_suffix('\n')
                .unwrap_or(part_body)
                .to_string(),
        });
    }
    if !closed {
        return Err(UserDataError::Mime(format!(
            "the user data's multipart document never closes its boundary {boundary:?}"
        )));
    }
    Ok(parts)
}

/// Writes `parts` as one `multipart/mixed` document with the boundary `//`.
pub fn render(parts: &[Part]) -> String {
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for part in parts {
        out.push_str(&format!(
            "--{BOUNDARY}\nContent-Type: {}\n\n{}\n",
            part.content_type, part.body
        ));
    }
    out.push_str(&format!("--{BOUNDARY}--\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_then_parse_round_trips_parts() {
        let parts = vec![
            Part {
                content_type: SHELL_SCRIPT.into(),
                body: "#!/bin/bash\necho hi".into(),
            },
            Part {
                content_type: NODE_CONFIG.into(),
                body: "kind: NodeConfig".into(),
            },
        ];
        let text = render(&parts);
        assert!(is_mime(&text));
        assert_eq!(parse(&text).unwrap(), parts);
    }

    #[test]
    fn parses_other_boundaries_crlf_and_a_preamble() {
        let text = "Content-Type: multipart/mixed; boundary=BOUND\r\nMIME-Version: 1.0\r\n\r\n\
                    preamble\r\n--BOUND\r\nContent-Type: text/cloud-config\r\n\r\n#cloud-config\r\n--BOUND--\r\n";
        assert_eq!(
            parse(text).unwrap(),
            vec![Part {
                content_type: "text/cloud-config".into(),
                body: "#cloud-config".into()
            }]
        );
    }

    #[test]
    fn unclosed_or_boundaryless_documents_are_errors() {
        let unclosed =
            "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\n\nx\n";
        assert!(
            parse(unclosed)
                .unwrap_err()
                .to_string()
                .contains("never closes")
        );
        let no_boundary = "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n";
        assert!(
            parse(no_boundary)
                .unwrap_err()
                .to_string()
                .contains("no boundary")
        );
        assert!(!is_mime("#!/bin/bash"));
    }
}
