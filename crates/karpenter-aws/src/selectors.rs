//! Pure half of selector-term resolution (`providers/subnet`, `providers/securitygroup`): which
//! `Describe*` filter sets to send for the terms, how to order the answers into status entries, and
//! how to say what matched nothing. The SDK half lives in [`crate::resolve`].

use std::collections::BTreeMap;

use karpenter_api::v1::{
    SecurityGroupSelectorTerm, SecurityGroupStatus, SubnetSelectorTerm, SubnetStatus,
};

/// One EC2 filter: `name` with any of `values`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Filter {
    pub fn new(name: impl Into<String>, values: Vec<String>) -> Self {
        Self {
            name: name.into(),
            values,
        }
    }
}

/// Filters AND-ed within one `Describe*` call; the calls for the terms of a selector are OR-ed.
pub type FilterSet = Vec<Filter>;

/// Upstream's tag filter: value `*` means "has the key", anything else is an exact match.
pub fn tag_filters(tags: &BTreeMap<String, String>) -> FilterSet {
    tags.iter()
        .map(|(key, value)| {
            if value == "*" {
                Filter::new("tag-key", vec![key.clone()])
            } else {
                Filter::new(format!("tag:{key}"), vec![value.clone()])
            }
        })
        .collect()
}

/// One `DescribeSubnets` filter set per tag term, plus one for all `id` terms together.
pub fn subnet_filter_sets(terms: &[SubnetSelectorTerm]) -> Vec<FilterSet> {
    let ids: Vec<String> = terms.iter().filter_map(|t| t.id.clone()).collect();
    let mut sets: Vec<FilterSet> = terms
        .iter()
        .filter(|t| t.id.is_none() && !t.tags.is_empty())
        .map(|t| tag_filters(&t.tags))
        .collect();
    if !ids.is_empty() {
        sets.insert(0, vec![Filter::new("subnet-id", ids)]);
    }
    sets
}

/// One `DescribeSecurityGroups` filter set per tag or name term, plus one for all `id` terms.
pub fn security_group_filter_sets(terms: &[SecurityGroupSelectorTerm]) -> Vec<FilterSet> {
    let ids: Vec<String> = terms.iter().filter_map(|t| t.id.clone()).collect();
    let mut sets: Vec<FilterSet> = terms
        .iter()
        .filter(|t| t.id.is_none() && (t.name.is_some() || !t.tags.is_empty()))
        .map(|t| {
            let mut set = Vec::new();
            if let Some(name) = &t.name {
                // The group's name field, not its Name tag, as upstream.
                set.push(Filter::new("group-name", vec![name.clone()]));
            }
            set.extend(tag_filters(&t.tags));
            set
        })
        .collect();
    if !ids.is_empty() {
        sets.insert(0, vec![Filter::new("group-id", ids)]);
    }
    sets
}

/// Human text for selector terms in condition messages: `tags karpenter.sh/discovery=my-cluster or
/// id subnet-123`.
pub fn describe_terms<'a>(
    terms: impl IntoIterator<
        Item = (
            &'a BTreeMap<String, String>,
            Option<&'a str>,
            Option<&'a str>,
        ),
    >,
) -> String {
    let parts: Vec<String> = terms
        .into_iter()
        .map(|(tags, id, name)| {
            let mut words = Vec::new();
            if let Some(id) = id {
                words.push(format!("id {id}"));
            }
            if let Some(name) = name {
                words.push(format!("name {name}"));
            }
            if !tags.is_empty() {
                let tags: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
                words.push(format!("tags {}", tags.join(",")));
            }
            words.join(" and ")
        })
        .collect();
    if parts.is_empty() {
        "no selector terms".into()
    } else {
        parts.join(" or ")
    }
}

/// "no subnet matches tags karpenter.sh/discovery=my-cluster".
pub fn no_subnet_message(terms: &[SubnetSelectorTerm]) -> String {
    format!(
        "no subnet matches {}",
        describe_terms(terms.iter().map(|t| (&t.tags, t.id.as_deref(), None)))
    )
}

/// "no security group matches name default or tags ...".
pub fn no_security_group_message(terms: &[SecurityGroupSelectorTerm]) -> String {
    format!(
        "no security group matches {}",
        describe_terms(
            terms
                .iter()
                .map(|t| (&t.tags, t.id.as_deref(), t.name.as_deref()))
        )
    )
}

/// A subnet as the resolver needs it, decoupled from the SDK type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubnetInfo {
    pub id: String,
    pub zone: String,
    pub zone_id: Option<String>,
    pub available_ip_addresses: i32,
}

/// Status entries de-duplicated by ID and sorted as upstream: most free IPs first, then ID.
pub fn subnet_statuses(mut subnets: Vec<SubnetInfo>) -> Vec<SubnetStatus> {
    subnets.sort_by(|a, b| {
        b.available_ip_addresses
            .cmp(&a.available_ip_addresses)
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut seen = std::collections::BTreeSet::new();
    subnets
        .into_iter()
        .filter(|s| seen.insert(s.id.clone()))
        .map(|s| SubnetStatus {
            id: s.id,
            zone: s.zone,
            zone_id: s.zone_id,
        })
        .collect()
}

/// Status entries de-duplicated and sorted by ID.
pub fn security_group_statuses(
    groups: impl IntoIterator<Item = SecurityGroupStatus>,
) -> Vec<SecurityGroupStatus> {
    let by_id: BTreeMap<String, SecurityGroupStatus> =
        groups.into_iter().map(|g| (g.id.clone(), g)).collect();
    by_id.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn wildcard_tag_values_become_tag_key_filters() {
        let set = tag_filters(&tags(&[("karpenter.sh/discovery", "c"), ("team", "*")]));
        assert_eq!(
            set,
            vec![
                Filter::new("tag:karpenter.sh/discovery", vec!["c".into()]),
                Filter::new("tag-key", vec!["team".into()]),
            ]
        );
    }

    #[test]
    fn id_terms_collapse_into_one_query_and_tag_terms_stay_separate() {
        let terms = vec![
            SubnetSelectorTerm {
                id: Some("subnet-1".into()),
                ..Default::default()
            },
            SubnetSelectorTerm {
                tags: tags(&[("a", "1")]),
                ..Default::default()
            },
            SubnetSelectorTerm {
                id: Some("subnet-2".into()),
                ..Default::default()
            },
            SubnetSelectorTerm {
                tags: tags(&[("b", "*")]),
                ..Default::default()
            },
        ];
        let sets = subnet_filter_sets(&terms);
        assert_eq!(sets.len(), 3);
        assert_eq!(
            sets[0],
            vec![Filter::new(
                "subnet-id",
                vec!["subnet-1".into(), "subnet-2".into()]
            )]
        );
        assert_eq!(sets[1], vec![Filter::new("tag:a", vec!["1".into()])]);
        assert_eq!(sets[2], vec![Filter::new("tag-key", vec!["b".into()])]);
    }

    #[test]
    fn security_group_name_term_filters_on_group_name_and_tags_together() {
        let terms = vec![SecurityGroupSelectorTerm {
            name: Some("web".into()),
            tags: tags(&[("env", "prod")]),
            ..Default::default()
        }];
        assert_eq!(
            security_group_filter_sets(&terms),
            vec![vec![
                Filter::new("group-name", vec!["web".into()]),
                Filter::new("tag:env", vec!["prod".into()]),
            ]]
        );
    }

    #[test]
    fn not_found_messages_say_what_was_looked_for() {
        let terms = vec![SubnetSelectorTerm {
            tags: tags(&[("karpenter.sh/discovery", "my-cluster")]),
            ..Default::default()
        }];
        assert_eq!(
            no_subnet_message(&terms),
            "no subnet matches tags karpenter.sh/discovery=my-cluster"
        );
        let sg_terms = vec![
            SecurityGroupSelectorTerm {
                id: Some("sg-1".into()),
                ..Default::default()
            },
            SecurityGroupSelectorTerm {
                name: Some("web".into()),
                ..Default::default()
            },
        ];
        assert_eq!(
            no_security_group_message(&sg_terms),
            "no security group matches id sg-1 or name web"
        );
    }

    #[test]
    fn subnets_sort_by_free_ips_then_id_without_duplicates() {
        let subnet = |id: &str, ips| SubnetInfo {
            id: id.into(),
            zone: "us-west-2a".into(),
            zone_id: Some("usw2-az1".into()),
            available_ip_addresses: ips,
        };
        let statuses = subnet_statuses(vec![
            subnet("subnet-b", 10),
            subnet("subnet-a", 10),
            subnet("subnet-c", 200),
            subnet("subnet-a", 10),
        ]);
        let ids: Vec<&str> = statuses.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["subnet-c", "subnet-a", "subnet-b"]);
    }

    #[test]
    fn security_groups_sort_by_id_without_duplicates() {
        let sg = |id: &str| SecurityGroupStatus {
            id: id.into(),
            name: Some(format!("name-{id}")),
        };
        let statuses = security_group_statuses([sg("sg-2"), sg("sg-1"), sg("sg-2")]);
        let ids: Vec<&str> = statuses.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["sg-1", "sg-2"]);
    }
}
