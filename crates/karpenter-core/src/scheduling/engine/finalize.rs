//! Turning the open NodeClaims into results: requirements, instance-type options (cheapest first,
//! truncated), labels and daemonset overhead, shared between identical NodeClaims.

use super::*;

impl Engine {
    /// The parts of a NodeClaim that depend only on its requirements and instance types.
    fn finalize_shape(
        &self,
        pool_index: usize,
        reqs: &Reqs,
        types: &Bits,
    ) -> Result<Finalized, String> {
        let pool = &self.pools[pool_index];
        let keys = &self.keys;
        let order = pool.price_order(reqs, keys);
        let max = self.options.max_instance_types.max(1);
        let options: Vec<(f64, usize)> = order
            .iter()
            .copied()
            .filter(|(_, t)| types.get(*t))
            .take(max)
            .collect();
        let mut kept = Bits::new(pool.types.len());
        for (_, t) in &options {
            kept.set(*t);
        }
        let unmet = pool.unmet_min_values(&kept, reqs);
        if !unmet.is_empty() && self.options.min_values_policy == MinValuesPolicy::Strict {
            let keys: Vec<&str> = unmet
                .iter()
                .map(|(k, _)| self.interner.key_str(*k))
                .collect();
            return Err(format!(
                "nodepool {}: NodePool couldn't meet minValues requirements for {} after keeping the {} cheapest instance types",
                pool.name,
                keys.join(", "),
                options.len()
            ));
        }
        let mut min_overhead: Option<ResVec> = None;
        let mut groups_seen: Vec<usize> = Vec::new();
        let mut capacity_types: BTreeSet<Sym> = BTreeSet::new();
        let mut overlay_applied = OverlayApplied::default();
        for (_, t) in &options {
            overlay_applied = overlay_applied.union(pool.types[*t].overlay_applied);
            let g = pool.types[*t].daemon_group;
            if !groups_seen.contains(&g) {
                groups_seen.push(g);
                match &mut min_overhead {
                    None => min_overhead = Some(pool.daemon_groups[g].overhead.clone()),
                    Some(m) => m.min_with(&pool.daemon_groups[g].overhead),
                }
            }
            for o in &pool.types[*t].offerings {
                if o.available && offering_compatible(o, reqs, keys) {
                    capacity_types.insert(o.capacity_type);
                }
            }
        }
        let mut text = self.reqs_text(reqs);
        let min_ct = text
            .get(&well_known::CAPACITY_TYPE_LABEL.to_string())
            .and_then(|r| r.min_values());
        let capacity_types = capacity_types
            .into_iter()
            .map(|c| self.interner.value_str(c).to_string());
        text.set(
            well_known::CAPACITY_TYPE_LABEL.to_string(),
            Requirement::is_in(capacity_types).with_min_values(min_ct),
        );
        let instance_type_min_values = text
            .get(&well_known::INSTANCE_TYPE_LABEL.to_string())
            .and_then(|r| r.min_values());
        // The instance-type list lives in `instance_types`; `node_claim_requirements()` adds it.
        text.remove(&well_known::INSTANCE_TYPE_LABEL.to_string());
        let mut labels = pool.labels.clone();
        labels.insert(well_known::NODEPOOL_LABEL.to_string(), pool.name.clone());
        for (k, r) in text.iter() {
            if well_known::is_well_known_label(k)
                || self.options.extra_well_known_labels.contains(k)
                || well_known::restricted_label_reason(k).is_some()
                || labels.contains_key(k)
            {
                continue;
            }
            if let Some(v) = r.any() {
                labels.insert(k.clone(), v);
            }
        }
        Ok(Finalized {
            requirements: text.to_node_selector(),
            instance_type_min_values: instance_type_min_values.map(|m| m as i32),
            instance_types: options
                .iter()
                .map(|(p, t)| InstanceTypeOption {
                    name: pool.types[*t].name.clone(),
                    price: *p,
                })
                .collect(),
            labels,
            daemon_overhead: min_overhead.unwrap_or_default(),
            overlay_applied,
        })
    }

    /// The NodeClaim to launch for `claim`, offering `types` (its types within the pool's limits).
    pub(super) fn finalize(
        &self,
        claim: &Claim,
        types: &Bits,
        cache: &mut FxMap<(usize, Reqs, Bits), Result<Rc<Finalized>, String>>,
    ) -> Result<NewNodeClaim, String> {
        let key = (claim.pool, claim.reqs.clone(), types.clone());
        let shape = match cache.get(&key) {
            Some(shape) => shape.clone(),
            None => {
                let shape = self
                    .finalize_shape(claim.pool, &claim.reqs, types)
                    .map(Rc::new);
                cache.insert(key, shape.clone());
                shape
            }
        }?;
        let pool = &self.pools[claim.pool];
        let mut requests = claim.requests.clone();
        requests.add(&shape.daemon_overhead);
        Ok(NewNodeClaim {
            node_pool: pool.name.clone(),
            hostname: self.interner.value_str(claim.hostname).to_string(),
            requirements: shape.requirements.clone(),
            instance_type_min_values: shape.instance_type_min_values,
            instance_types: shape.instance_types.clone(),
            pods: claim.pods.clone(),
            requests: self.interner.resource_list(&requests),
            labels: shape.labels.clone(),
            taints: pool.taints.clone(),
            startup_taints: pool.startup_taints.clone(),
            min_values_relaxed: claim.min_values_relaxed,
            overlay_applied: shape.overlay_applied,
        })
    }
}

/// What identical NodeClaims share.
pub(super) struct Finalized {
    requirements: Vec<karpenter_api::v1::NodeSelectorRequirementWithMinValues>,
    instance_type_min_values: Option<i32>,
    instance_types: Arc<[InstanceTypeOption]>,
    labels: BTreeMap<String, String>,
    daemon_overhead: ResVec,
    /// Over the kept options only, as upstream's `ToNodeClaim` looks at the truncated list.
    overlay_applied: OverlayApplied,
}
