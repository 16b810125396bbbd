//! Static cost of the CEL rules, estimated in the spirit of the API server (cel-go's cost
//! estimator with the apiextensions size estimates):
//!
//! * a comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) costs its range plus the
//!   range's maximum cardinality times its body: `maxItems`/`maxProperties`, or, when absent, as
//!   many of the smallest possible elements as fit in a 3 MiB request;
//! * string functions cost a tenth of the string's maximum length (`maxLength`, the longest
//!   `enum` value, or 3 MiB), regex functions that times a quarter of the regex length;
//! * every other call, select and identifier costs 1.
//!
//! A rule over 10,000,000 is refused, and so is a schema whose rules, each multiplied by how
//! many times it can run (the cardinalities of the lists and maps above it), sum to more than
//! 100,000,000.

use kube_cel::cel;
use kube_cel::cel::common::ast::{EntryExpr, Expr, LiteralValue};
use serde_json::Value;

use super::{FieldError, children};

/// The API server's `StaticEstimatedCostLimit`: the most one rule may cost.
pub const PER_RULE_COST_LIMIT: u64 = 10_000_000;
/// The API server's `StaticEstimatedCRDCostLimit`: the most all rules of a schema may cost.
pub const PER_CRD_COST_LIMIT: u64 = 100_000_000;
/// The API server's request size limit, which bounds unbounded lists, maps and strings.
const MAX_REQUEST_BYTES: u64 = 3 * 1024 * 1024;
/// Map keys carry no schema; they are estimated as the longest qualified label key (253 + 1 + 63).
const MAP_KEY_LENGTH: u64 = 317;

const HINT: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";

/// The estimated cost of every rule of a schema, and their total weighted by how many times
/// each can run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CostReport {
    /// `(path of the rule, estimated cost of one evaluation)`.
    pub rules: Vec<(String, u64)>,
    /// The sum of each rule's cost times its node's cardinality (what the per-CRD limit bounds).
    pub total: u64,
}

/// Estimates every rule of `schema`.
pub fn cost_report(schema: &Value) -> CostReport {
    let mut report = CostReport::default();
    walk(schema, "", 1, &mut report);
    report
}

pub(super) fn check(schema: &Value, base: &str) -> Vec<FieldError> {
    let mut report = CostReport::default();
    walk(schema, base, 1, &mut report);
    let mut errors: Vec<FieldError> = report
        .rules
        .iter()
        .filter(|(_, cost)| *cost > PER_RULE_COST_LIMIT)
        .map(|(path, cost)| {
            FieldError::forbidden(
                path.as_str(),
                format!(
                    "estimated rule cost exceeds budget by factor of {} {HINT}",
                    factor(*cost, PER_RULE_COST_LIMIT)
                ),
            )
        })
        .collect();
    if report.total > PER_CRD_COST_LIMIT {
        errors.push(FieldError::forbidden(
            base,
            format!(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of {} {HINT}",
                factor(report.total, PER_CRD_COST_LIMIT)
            ),
        ));
    }
    errors
}

fn factor(cost: u64, limit: u64) -> String {
    format!("{:.6}x", cost as f64 / limit as f64)
}

/// `runs`: how many times a rule at this node can run per object.
fn walk(node: &Value, path: &str, runs: u64, report: &mut CostReport) {
    if let Some(rules) = node
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for (i, rule) in rules.iter().enumerate() {
            let Some(text) = rule.get("rule").and_then(Value::as_str) else {
                continue;
            };
            // Compilation errors are the structural check's to report.
            let Ok(cost) = rule_cost(text, node) else {
                continue;
            };
            report
                .rules
                .push((format!("{path}.x-kubernetes-validations[{i}].rule"), cost));
            report.total = report.total.saturating_add(cost.saturating_mul(runs));
        }
    }
    for (segment, child) in children(node) {
        let child_runs = if segment == "items" || segment == "additionalProperties" {
            runs.saturating_mul(cardinality(node))
        } else {
            runs
        };
        walk(child, &format!("{path}.{segment}"), child_runs, report);
    }
}

/// The estimated maximum cost of one rule placed at `node`.
pub(crate) fn rule_cost(rule: &str, node: &Value) -> Result<u64, cel::ParseErrors> {
    let program = cel::Program::compile(rule)?;
    let mut estimator = Estimator {
        self_node: node,
        scopes: Vec::new(),
    };
    Ok(estimator.expr(&program.expression().expr).cost)
}

/// What an expression evaluates to, as far as sizes go.
#[derive(Clone)]
enum Shape<'a> {
    /// A value described by a schema node.
    Node(&'a Value),
    /// A map key (a string without a schema).
    MapKey,
    /// A list computed by the rule (`filter`, `map`, a literal): element shape and bound.
    List(Box<Shape<'a>>, u64),
    /// A string computed by the rule, with a length bound.
    Text(u64),
    /// A scalar or anything else whose size does not matter.
    Other,
}

struct Estimate<'a> {
    cost: u64,
    shape: Shape<'a>,
}

impl<'a> Estimate<'a> {
    fn new(cost: u64, shape: Shape<'a>) -> Self {
        Self { cost, shape }
    }
}

struct Estimator<'a> {
    self_node: &'a Value,
    /// Comprehension variables in scope, innermost last.
    scopes: Vec<(String, Shape<'a>)>,
}

impl<'a> Estimator<'a> {
    fn expr(&mut self, expr: &Expr) -> Estimate<'a> {
        match expr {
            Expr::Literal(LiteralValue::String(text)) => {
                Estimate::new(0, Shape::Text(text.len() as u64))
            }
            Expr::Literal(_) | Expr::Unspecified => Estimate::new(0, Shape::Other),
            Expr::Ident(name) => {
                let shape = match name.as_str() {
                    "self" | "oldSelf" => Shape::Node(self.self_node),
                    _ => self
                        .scopes
                        .iter()
                        .rev()
                        .find(|(var, _)| var == name)
                        .map(|(_, shape)| shape.clone())
                        .unwrap_or(Shape::Other),
                };
                Estimate::new(1, shape)
            }
            Expr::Select(select) => {
                let operand = self.expr(&select.operand.expr);
                let shape = if select.test {
                    Shape::Other
                } else {
                    field(&operand.shape, &select.field)
                };
                Estimate::new(operand.cost.saturating_add(1), shape)
            }
            Expr::List(list) => {
                let mut cost: u64 = 1;
                let mut element = Shape::Other;
                for item in &list.elements {
                    let estimate = self.expr(&item.expr);
                    cost = cost.saturating_add(estimate.cost);
                    element = estimate.shape;
                }
                Estimate::new(
                    cost,
                    Shape::List(Box::new(element), list.elements.len() as u64),
                )
            }
            Expr::Map(map) => {
                let mut cost: u64 = 1;
                for entry in &map.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        cost = cost
                            .saturating_add(self.expr(&entry.key.expr).cost)
                            .saturating_add(self.expr(&entry.value.expr).cost);
                    }
                }
                Estimate::new(cost, Shape::Other)
            }
            Expr::Struct(_) => Estimate::new(1, Shape::Other),
            Expr::Comprehension(comp) => {
                let range = self.expr(&comp.iter_range.expr);
                let count = cardinality_of(&range.shape);
                let element = element(&range.shape);
                let init = self.expr(&comp.accu_init.expr);
                self.scopes.push((comp.iter_var.clone(), element.clone()));
                if let Some(second) = &comp.iter_var2 {
                    self.scopes.push((second.clone(), element.clone()));
                }
                let accumulated = Shape::List(Box::new(element), count);
                self.scopes
                    .push((comp.accu_var.clone(), accumulated.clone()));
                let body = self
                    .expr(&comp.loop_cond.expr)
                    .cost
                    .saturating_add(self.expr(&comp.loop_step.expr).cost);
                let result = self.expr(&comp.result.expr);
                let pushed = if comp.iter_var2.is_some() { 3 } else { 2 };
                self.scopes
                    .truncate(self.scopes.len().saturating_sub(pushed));
                let cost = range
                    .cost
                    .saturating_add(init.cost)
                    .saturating_add(count.saturating_mul(body))
                    .saturating_add(result.cost);
                Estimate::new(cost, accumulated)
            }
            Expr::Call(call) => {
                let target = call.target.as_ref().map(|t| self.expr(&t.expr));
                let args: Vec<Estimate<'a>> =
                    call.args.iter().map(|a| self.expr(&a.expr)).collect();
                let operands_cost = target
                    .iter()
                    .chain(args.iter())
                    .fold(0u64, |sum, e| sum.saturating_add(e.cost));
                let (own, shape) =
                    self.call_cost(&call.func_name, target.as_ref(), &args, &call.args);
                Estimate::new(operands_cost.saturating_add(own), shape)
            }
        }
    }

    /// The cost of the call itself (operands excluded) and the shape of its result.
    fn call_cost(
        &self,
        name: &str,
        target: Option<&Estimate<'a>>,
        args: &[Estimate<'a>],
        raw_args: &[cel::IdedExpr],
    ) -> (u64, Shape<'a>) {
        let receiver = target.or(args.first());
        let receiver_len = receiver.map_or(0, |e| length_of(&e.shape));
        let tenth = |len: u64| len.div_ceil(10);
        match name {
            "_[_]" => {
                let shape = args
                    .first()
                    .map_or(Shape::Other, |e| element_or_value(&e.shape));
                (1, shape)
            }
            "_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" => {
                let shortest = args.iter().map(|e| length_of(&e.shape)).min().unwrap_or(0);
                (1u64.saturating_add(tenth(shortest)), Shape::Other)
            }
            "@in" => {
                // `x in list` compares with every element; `k in map` is a lookup.
                let container = args.get(1).map(|e| &e.shape);
                let compares = match container {
                    Some(shape @ (Shape::List(..) | Shape::Node(_))) if is_list(shape) => {
                        cardinality_of(shape)
                    }
                    _ => 1,
                };
                let each =
                    1u64.saturating_add(tenth(args.first().map_or(0, |e| length_of(&e.shape))));
                (compares.saturating_mul(each), Shape::Other)
            }
            "matches" | "find" | "findAll" => {
                let regex_len = raw_args
                    .iter()
                    .rev()
                    .find_map(|a| match &a.expr {
                        Expr::Literal(LiteralValue::String(text)) => Some(text.len() as u64),
                        _ => None,
                    })
                    .unwrap_or(MAX_REQUEST_BYTES);
                let cost = tenth(receiver_len)
                    .max(1)
                    .saturating_mul(regex_len.div_ceil(4).max(1));
                (cost, Shape::Text(receiver_len))
            }
            "startsWith" | "endsWith" => {
                let prefix = args.last().map_or(0, |e| length_of(&e.shape));
                (1u64.saturating_add(tenth(prefix)), Shape::Other)
            }
            "contains" => {
                let needle = args.last().map_or(0, |e| length_of(&e.shape));
                (
                    1u64.saturating_add(tenth(receiver_len).saturating_mul(tenth(needle).max(1))),
                    Shape::Other,
                )
            }
            "lowerAscii" | "upperAscii" | "trim" | "replace" | "split" | "substring" | "join"
            | "int" | "uint" | "double" | "string" | "duration" | "timestamp" | "quantity"
            | "isQuantity" | "url" | "isURL" | "ip" | "isIP" | "cidr" | "isCIDR" | "indexOf"
            | "lastIndexOf" | "charAt" => (
                1u64.saturating_add(tenth(receiver_len)),
                Shape::Text(receiver_len),
            ),
            "_+_" => {
                let len = args
                    .iter()
                    .fold(0u64, |sum, e| sum.saturating_add(length_of(&e.shape)));
                (1u64.saturating_add(tenth(len)), Shape::Text(len))
            }
            "_?_:_" => (0, args.get(1).map_or(Shape::Other, |e| e.shape.clone())),
            _ => (1, Shape::Other),
        }
    }
}

fn is_list(shape: &Shape<'_>) -> bool {
    match shape {
        Shape::List(..) => true,
        Shape::Node(node) => node.get("type").and_then(Value::as_str) == Some("array"),
        _ => false,
    }
}

fn field<'a>(shape: &Shape<'a>, name: &str) -> Shape<'a> {
    match shape {
        Shape::Node(node) => node
            .get("properties")
            .and_then(|p| p.get(name))
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))
            .map_or(Shape::Other, Shape::Node),
        _ => Shape::Other,
    }
}

/// What a comprehension variable ranges over: list elements, or map keys.
fn element<'a>(shape: &Shape<'a>) -> Shape<'a> {
    match shape {
        Shape::List(element, _) => (**element).clone(),
        Shape::Node(node) if is_list(shape) => node.get("items").map_or(Shape::Other, Shape::Node),
        Shape::Node(_) => Shape::MapKey,
        _ => Shape::Other,
    }
}

/// What `x[i]` yields: a list element or a map value.
fn element_or_value<'a>(shape: &Shape<'a>) -> Shape<'a> {
    match shape {
        Shape::Node(node) if !is_list(shape) => node
            .get("additionalProperties")
            .filter(|a| a.is_object())
            .map_or(Shape::Other, Shape::Node),
        other => element(other),
    }
}

fn cardinality_of(shape: &Shape<'_>) -> u64 {
    match shape {
        Shape::List(_, count) => *count,
        Shape::Node(node) => cardinality(node),
        Shape::Text(len) => *len,
        Shape::MapKey | Shape::Other => 1,
    }
}

/// The most elements a list or map node can hold.
pub(crate) fn cardinality(node: &Value) -> u64 {
    if node.get("type").and_then(Value::as_str) == Some("array") {
        if let Some(max) = node.get("maxItems").and_then(Value::as_u64) {
            return max;
        }
        let element = node.get("items").map_or(1, min_serialized_size);
        // `[` and `]`, and a comma after every element but the last.
        return MAX_REQUEST_BYTES.saturating_sub(2) / element.saturating_add(1);
    }
    if let Some(max) = node.get("maxProperties").and_then(Value::as_u64) {
        return max;
    }
    let value = node
        .get("additionalProperties")
        .map_or(1, min_serialized_size);
    // `"":` before each value and a comma after it.
    MAX_REQUEST_BYTES.saturating_sub(2) / value.saturating_add(4)
}

fn min_serialized_size(node: &Value) -> u64 {
    match node.get("type").and_then(Value::as_str) {
        Some("string") => 2,
        Some("boolean") => 4,
        Some("object") | Some("array") => 2,
        _ => 1,
    }
}

/// The longest a string can be.
fn length_of(shape: &Shape<'_>) -> u64 {
    match shape {
        Shape::Node(node) => {
            if let Some(max) = node.get("maxLength").and_then(Value::as_u64) {
                return max;
            }
            if let Some(values) = node.get("enum").and_then(Value::as_array) {
                return values
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.len() as u64)
                    .max()
                    .unwrap_or(0);
            }
            match node.get("type").and_then(Value::as_str) {
                Some("string") => MAX_REQUEST_BYTES.saturating_sub(2),
                _ => 0,
            }
        }
        Shape::MapKey => MAP_KEY_LENGTH,
        Shape::Text(len) => *len,
        Shape::List(..) | Shape::Other => 0,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn list(max_items: Option<u64>) -> Value {
        let mut node = json!({"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 63}}}});
        if let Some(max) = max_items {
            node["maxItems"] = json!(max);
        }
        node
    }

    #[test]
    fn bounded_lists_are_cheap_and_unbounded_ones_are_not() {
        let rule = "self.all(x, self.exists_one(y, x.name == y.name))";
        let bounded = rule_cost(rule, &list(Some(100))).unwrap();
        assert!(bounded < 1_000_000, "{bounded}");
        let unbounded = rule_cost(rule, &list(None)).unwrap();
        assert!(unbounded > PER_RULE_COST_LIMIT, "{unbounded}");
    }

    #[test]
    fn string_functions_scale_with_max_length() {
        let short = json!({"type": "string", "maxLength": 30});
        let long = json!({"type": "string"});
        let rule = "self.matches('^[a-z]+@.+$')";
        assert!(rule_cost(rule, &short).unwrap() < 100);
        assert!(rule_cost(rule, &long).unwrap() > 100_000);
    }

    #[test]
    fn unbounded_cardinality_comes_from_the_request_size() {
        assert_eq!(
            cardinality(&json!({"type": "array", "items": {"type": "string"}})),
            (3 * 1024 * 1024 - 2) / 3
        );
        assert_eq!(
            cardinality(&json!({"type": "array", "maxItems": 7, "items": {"type": "string"}})),
            7
        );
    }
}
