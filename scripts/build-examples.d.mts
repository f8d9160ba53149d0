export function buildExampleConsumer(): Promise<string>;
export function buildOutcomeProbe(): Promise<string>;
export function buildBatchingProbe(): Promise<string>;
export function buildOutboxProbe(): Promise<string>;
