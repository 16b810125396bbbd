//! The AWS cloud provider: settings, SDK clients and EC2NodeClass resolution (subnets, security
//! groups, AMIs). The only crate of the workspace that depends on the AWS SDK.
//!
//! Pure planning and ordering live in [`selectors`] and [`amis`] (unit-tested without a cloud); the
//! SDK calls live in [`resolve`] (integration-tested against moto, see `docs/aws-provider.md`).

pub mod amis;
pub mod clients;
pub mod drift;
pub mod error;
pub mod fleet;
pub mod instance;
pub mod instance_profile;
pub mod instance_types;
pub mod interruption;
pub mod launch_template;
pub mod nodeclass;
pub mod pricing;
pub mod provider;
pub mod reservations;
pub mod resolve;
pub mod selectors;
pub mod settings;
pub mod unavailable;
pub mod userdata;

pub use aws_sdk_ec2::config::Credentials;
pub use clients::{AwsClients, ClientOptions};
pub use error::Error;
pub use instance_types::{InstanceTypeProvider, InstanceTypesError};
pub use resolve::NodeClassResolution;
pub use settings::{Settings, SettingsError};
