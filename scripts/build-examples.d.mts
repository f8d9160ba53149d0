export function buildExampleConsumer(): Promise<string>;
