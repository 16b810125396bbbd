//! Interruption messages (reference §6.1): the EventBridge events the interruption queue receives,
//! parsed into what the controller does about them. Pure: the SQS loop ([`consumer`]) receives,
//! parses, acts and deletes; a malformed message is a typed [`ParseError`] (logged and deleted by
//! the loop), never a panic; an event of a kind we do not act on is [`Interruption::NoAction`].

pub mod consumer;

use serde_json::Value;

/// What a message says happened, with the instances it concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// `EC2 Spot Instance Interruption Warning`: EC2 reclaims the instance in two minutes.
    SpotInterrupted { instance_id: String, action: String },
    /// `EC2 Instance Rebalance Recommendation`: elevated risk; an event only.
    RebalanceRecommendation { instance_id: String },
    /// `AWS Health Event` of EC2 in category `scheduledChange` (retirement, maintenance).
    ScheduledChange { instance_ids: Vec<String> },
    /// `EC2 Instance State-change Notification` to stopping/stopped.
    InstanceStopped { instance_id: String, state: String },
    /// `EC2 Instance State-change Notification` to shutting-down/terminated.
    InstanceTerminated { instance_id: String, state: String },
    /// `EC2 Capacity Reservation Instance Interruption Warning`.
    CapacityReservationInterrupted { instance_id: String },
    /// A well-formed event that needs nothing (other state changes, other Health events, kinds
    /// the queue should not receive); the message is deleted.
    NoAction { detail_type: String },
}

/// What the controller does with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Delete the instances' NodeClaims (graceful: cordon and drain).
    DeleteNodeClaims,
    /// Record an event on the NodeClaims, nothing else.
    EventOnly,
    Nothing,
}

impl Interruption {
    pub fn action(&self) -> Action {
        match self {
            Self::SpotInterrupted { .. }
            | Self::ScheduledChange { .. }
            | Self::InstanceStopped { .. }
            | Self::InstanceTerminated { .. }
            | Self::CapacityReservationInterrupted { .. } => Action::DeleteNodeClaims,
            Self::RebalanceRecommendation { .. } => Action::EventOnly,
            Self::NoAction { .. } => Action::Nothing,
        }
    }

    /// Whether the instance's spot offering should be marked unavailable (spot interruptions).
    pub fn marks_spot_offering_unavailable(&self) -> bool {
        matches!(self, Self::SpotInterrupted { .. })
    }

    /// Whether the instance's capacity reservation should be marked full (EC2 reclaims
    /// interruptible reservation capacity).
    pub fn marks_reservation_unavailable(&self) -> bool {
        matches!(self, Self::CapacityReservationInterrupted { .. })
    }

    /// The `reason` of `karpenter_nodeclaims_disrupted_total` and the events (upstream's kinds).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SpotInterrupted { .. } => "spot_interrupted",
            Self::RebalanceRecommendation { .. } => "rebalance_recommendation",
            Self::ScheduledChange { .. } => "scheduled_change",
            Self::InstanceStopped { .. } => "instance_stopped",
            Self::InstanceTerminated { .. } => "instance_terminated",
            Self::CapacityReservationInterrupted { .. } => "capacity_reservation_interrupted",
            Self::NoAction { .. } => "no_op",
        }
    }

    /// The instance IDs the message concerns.
    pub fn instance_ids(&self) -> Vec<&str> {
        match self {
            Self::SpotInterrupted { instance_id, .. }
            | Self::RebalanceRecommendation { instance_id }
            | Self::InstanceStopped { instance_id, .. }
            | Self::InstanceTerminated { instance_id, .. }
            | Self::CapacityReservationInterrupted { instance_id } => vec![instance_id.as_str()],
            Self::ScheduledChange { instance_ids } => {
                instance_ids.iter().map(String::as_str).collect()
            }
            Self::NoAction { .. } => Vec::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("interruption message is not JSON: {0}")]
    NotJson(String),
    #[error("interruption message is not an EventBridge event: missing or non-string {0:?}")]
    MissingEnvelopeField(&'static str),
    #[error("{detail_type} event has no string detail.{field}")]
    MissingDetailField {
        detail_type: String,
        field: &'static str,
    },
}

fn string<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value.get(field).and_then(Value::as_str)
}

/// Parses one SQS message body.
pub fn parse(body: &str) -> Result<Interruption, ParseError> {
    let event: Value =
        serde_json::from_str(body).map_err(|e| ParseError::NotJson(e.to_string()))?;
    let source = string(&event, "source").ok_or(ParseError::MissingEnvelopeField("source"))?;
    let detail_type =
        string(&event, "detail-type").ok_or(ParseError::MissingEnvelopeField("detail-type"))?;
    let version = string(&event, "version").unwrap_or("0");
    let detail = event.get("detail").unwrap_or(&Value::Null);
    let field = |name: &'static str| {
        string(detail, name)
            .map(str::to_string)
            .ok_or_else(|| ParseError::MissingDetailField {
                detail_type: detail_type.to_string(),
                field: name,
            })
    };
    let no_action = || Interruption::NoAction {
        detail_type: detail_type.to_string(),
    };
    if version != "0" {
        return Ok(no_action());
    }
    Ok(match (source, detail_type) {
        ("aws.ec2", "EC2 Spot Instance Interruption Warning") => Interruption::SpotInterrupted {
            instance_id: field("instance-id")?,
            action: string(detail, "instance-action")
                .unwrap_or("terminate")
                .to_string(),
        },
        ("aws.ec2", "EC2 Instance Rebalance Recommendation") => {
            Interruption::RebalanceRecommendation {
                instance_id: field("instance-id")?,
            }
        }
        ("aws.ec2", "EC2 Instance State-change Notification") => {
            let instance_id = field("instance-id")?;
            let state = field("state")?;
            match state.as_str() {
                "stopping" | "stopped" => Interruption::InstanceStopped { instance_id, state },
                "shutting-down" | "terminated" => {
                    Interruption::InstanceTerminated { instance_id, state }
                }
                _ => no_action(),
            }
        }
        ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning") => {
            Interruption::CapacityReservationInterrupted {
                instance_id: field("instance-id")?,
            }
        }
        ("aws.health", "AWS Health Event") => {
            if string(detail, "service") != Some("EC2")
                || string(detail, "eventTypeCategory") != Some("scheduledChange")
            {
                return Ok(no_action());
            }
            let instance_ids: Vec<String> = detail
                .get("affectedEntities")
                .and_then(Value::as_array)
                .map(|entities| {
                    entities
                        .iter()
                        .filter_map(|e| string(e, "entityValue"))
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if instance_ids.is_empty() {
                return Err(ParseError::MissingDetailField {
                    detail_type: detail_type.to_string(),
                    field: "affectedEntities[].entityValue",
                });
            }
            Interruption::ScheduledChange { instance_ids }
        }
        _ => no_action(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(source: &str, detail_type: &str, detail: Value) -> String {
        serde_json::json!({
            "version": "0",
            "id": "7bf73129-1428-4cd3-a780-95db273d1602",
            "detail-type": detail_type,
            "source": source,
            "account": "123456789012",
            "time": "2026-11-23T05:00:00Z",
            "region": "us-west-2",
            "resources": ["arn:aws:ec2:us-west-2a:instance/i-0b662ef9931388ba0"],
            "detail": detail
        })
        .to_string()
    }

    #[test]
    fn spot_interruption_deletes_and_marks_the_offering() {
        let parsed = parse(&event(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            serde_json::json!({"instance-id": "i-0b662ef9931388ba0", "instance-action": "terminate"}),
        ))
        .unwrap();
        assert_eq!(
            parsed,
            Interruption::SpotInterrupted {
                instance_id: "i-0b662ef9931388ba0".into(),
                action: "terminate".into()
            }
        );
        assert_eq!(parsed.action(), Action::DeleteNodeClaims);
        assert!(parsed.marks_spot_offering_unavailable());
        assert_eq!(parsed.kind(), "spot_interrupted");
        assert_eq!(parsed.instance_ids(), vec!["i-0b662ef9931388ba0"]);
    }

    #[test]
    fn rebalance_is_an_event_only() {
        let parsed = parse(&event(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            serde_json::json!({"instance-id": "i-1"}),
        ))
        .unwrap();
        assert_eq!(parsed.action(), Action::EventOnly);
        assert!(!parsed.marks_spot_offering_unavailable());
    }

    #[test]
    fn scheduled_changes_of_ec2_only() {
        let detail = serde_json::json!({
            "eventArn": "arn:aws:health:us-west-2::event/EC2/x",
            "service": "EC2",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "affectedEntities": [{"entityValue": "i-1"}, {"entityValue": "i-2"}]
        });
        let parsed = parse(&event("aws.health", "AWS Health Event", detail.clone())).unwrap();
        assert_eq!(parsed.instance_ids(), vec!["i-1", "i-2"]);
        assert_eq!(parsed.action(), Action::DeleteNodeClaims);
        let mut other = detail.clone();
        other["eventTypeCategory"] = "issue".into();
        assert_eq!(
            parse(&event("aws.health", "AWS Health Event", other))
                .unwrap()
                .action(),
            Action::Nothing
        );
        let mut empty = detail;
        empty["affectedEntities"] = serde_json::json!([]);
        assert!(parse(&event("aws.health", "AWS Health Event", empty)).is_err());
    }

    #[test]
    fn state_changes_stop_and_terminate_but_running_is_nothing() {
        let state = |s: &str| {
            parse(&event(
                "aws.ec2",
                "EC2 Instance State-change Notification",
                serde_json::json!({"instance-id": "i-1", "state": s}),
            ))
            .unwrap()
        };
        assert_eq!(state("stopping").kind(), "instance_stopped");
        assert_eq!(state("stopped").kind(), "instance_stopped");
        assert_eq!(state("shutting-down").kind(), "instance_terminated");
        assert_eq!(state("terminated").action(), Action::DeleteNodeClaims);
        assert_eq!(state("running").action(), Action::Nothing);
        assert_eq!(state("pending").action(), Action::Nothing);
    }

    #[test]
    fn capacity_reservation_interruption_deletes() {
        let parsed = parse(&event(
            "aws.ec2",
            "EC2 Capacity Reservation Instance Interruption Warning",
            serde_json::json!({"instance-id": "i-9"}),
        ))
        .unwrap();
        assert_eq!(parsed.kind(), "capacity_reservation_interrupted");
        assert_eq!(parsed.action(), Action::DeleteNodeClaims);
        assert!(parsed.marks_reservation_unavailable());
        assert!(!parsed.marks_spot_offering_unavailable());
    }

    #[test]
    fn malformed_messages_are_typed_errors_never_panics() {
        assert!(matches!(parse("not json"), Err(ParseError::NotJson(_))));
        assert!(matches!(
            parse("[1,2]"),
            Err(ParseError::MissingEnvelopeField("source"))
        ));
        assert!(matches!(
            parse(r#"{"source":"aws.ec2"}"#),
            Err(ParseError::MissingEnvelopeField("detail-type"))
        ));
        let no_id = parse(&event(
            "aws.ec2",
            "EC2 Spot Instance Interruption Warning",
            serde_json::json!({"instance-action": "terminate"}),
        ));
        assert_eq!(
            no_id.unwrap_err().to_string(),
            "EC2 Spot Instance Interruption Warning event has no string detail.instance-id"
        );
        let numeric_id = parse(&event(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            serde_json::json!({"instance-id": 5}),
        ));
        assert!(numeric_id.is_err());
        let no_detail = parse(
            r#"{"version":"0","source":"aws.ec2","detail-type":"EC2 Instance State-change Notification"}"#,
        );
        assert!(no_detail.is_err());
        for body in ["", "{", "null", "\"x\"", "{\"source\":1,\"detail-type\":2}"] {
            assert!(parse(body).is_err(), "{body:?}");
        }
    }

    #[test]
    fn unknown_kinds_and_versions_need_nothing() {
        assert_eq!(
            parse(&event(
                "aws.ec2",
                "EC2 AMI State Change",
                serde_json::json!({})
            ))
            .unwrap()
            .action(),
            Action::Nothing
        );
        let v1 = r#"{"version":"1","source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}"#;
        assert_eq!(parse(v1).unwrap().action(), Action::Nothing);
    }
}
