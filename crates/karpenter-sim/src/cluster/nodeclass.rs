//! The sim cloud's EC2NodeClass status writer and its launch check, on the cluster (the
//! decisions are [`crate::nodeclass`]'s): each NodeClass gets the conditions the aws provider's
//! controller writes (`Ready` among them) once per generation, and a NodeClaim whose NodeClass is
//! missing or not Ready is refused at launch.

use std::sync::Arc;

use karpenter_api::NodeClaim;
use karpenter_api::v1::EC2NodeClass;
use karpenter_core::clock::Clock;
use karpenter_core::cloud_provider::CloudError;
use karpenter_kube::{is_conflict, is_not_found, timeouts};
use kube::api::{ListParams, Patch};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::nodeclass::{conditions_to_write, launch_refusal};

/// Reads and writes EC2NodeClasses for the sim cloud.
#[derive(Clone)]
pub struct SimNodeClasses {
    api: Api<EC2NodeClass>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for SimNodeClasses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimNodeClasses").finish_non_exhaustive()
    }
}

impl SimNodeClasses {
    pub fn new(client: kube::Client, clock: Arc<dyn Clock>) -> Self {
        SimNodeClasses {
            api: Api::all(client),
            clock,
        }
    }

    /// Writes the status of every NodeClass not reconciled for its generation yet. A NodeClass
    /// that cannot be written now (changed meanwhile, refused by an admission policy) is tried
    /// again on the next call; the CRD not being installed is not an error (nothing to write).
    pub async fn sync(&self) -> Result<(), kube::Error> {
        let list = match timeouts::api(self.api.list(&ListParams::default())).await {
            Ok(list) => list,
            Err(err) if is_not_found(&err) => return Ok(()),
            Err(err) => return Err(err),
        };
        let now = self.clock.now().to_string();
        for node_class in list.items {
            let Some(conditions) = conditions_to_write(&node_class, &now) else {
                continue;
            };
            let name = node_class.name_any();
            // The resourceVersion makes the write conditional: a status someone wrote since the
            // list is not overwritten (the next sync reads it).
            let patch = json!({
                "metadata": {"resourceVersion": node_class.resource_version()},
                "status": {"conditions": conditions},
            });
            match timeouts::api(self.api.patch_status(
                &name,
                &karpenter_kube::identity::patch_params(),
                &Patch::Merge(&patch),
            ))
            .await
            {
                Ok(_) => tracing::debug!(nodeclass = %name, "sim: wrote EC2NodeClass status"),
                Err(err) if is_conflict(&err) || is_not_found(&err) => {}
                Err(err) => {
                    tracing::warn!(nodeclass = %name, error = %err, "sim: cannot write EC2NodeClass status; retrying");
                }
            }
        }
        Ok(())
    }

    /// Refuses the launch when the NodeClaim's NodeClass is missing or not Ready (read from the
    /// API server, not a cache: a NodeClass created just before its NodeClaim must be found).
    pub async fn check_launch(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let reference = &claim.spec.node_class_ref;
        if launch_refusal(reference, None).is_none() {
            // Not a kind the sim checks (a missing one of its kinds is always refused).
            return Ok(());
        }
        let found = match timeouts::api(self.api.get_opt(&reference.name)).await {
            Ok(found) => found,
            Err(err) => {
                return Err(CloudError::other_from(
                    format!("reading EC2NodeClass {:?}", reference.name),
                    err,
                ));
            }
        };
        match launch_refusal(reference, found.as_ref()) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }
}
